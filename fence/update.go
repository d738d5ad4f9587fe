package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Update describes a single-row UPDATE of a business table that carries its
// own guard column, for [UpdateToken] and [UpdateVersion]. Table, Set and
// Where are SQL text inserted as written: never build them from untrusted
// input; pass values as arguments.
type Update struct {
	// Table is the table to update, e.g. "accounts". Required.
	Table string
	// Set holds the assignments of the business columns, without the guard
	// columns, e.g. "balance = balance - ?". Required.
	Set string
	// SetArgs are the arguments of the placeholders in Set.
	SetArgs []any
	// Where selects the one row to update, e.g. "id = ?". Required.
	Where string
	// WhereArgs are the arguments of the placeholders in Where.
	WhereArgs []any
	// Column is the guard column.
	// default: "fence_token" for UpdateToken, "version" for UpdateVersion
	Column string
	// OwnerColumn holds the owner of the token (UpdateToken only).
	// default: "fence_owner"
	OwnerColumn string
}

func (u Update) check(column string) (Update, error) {
	if u.Table == "" || u.Set == "" || u.Where == "" {
		return u, errors.New("fence: Update needs Table, Set and Where")
	}
	if u.Column == "" {
		u.Column = column
	}
	if u.OwnerColumn == "" {
		u.OwnerColumn = "fence_owner"
	}
	return u, nil
}

// UpdateToken runs u on a table whose rows carry a fencing-token column and
// an owner column, with the acceptance rule of [Claim]: the row is updated
// only if its token is lower than token, or equal and written by the same
// owner; the update stores token and owner in the row. The statement is
//
//	UPDATE <Table> SET <Set>, <Column> = LAST_INSERT_ID(?), <OwnerColumn> = ?
//	WHERE (<Where>) AND (<Column> < ? OR (<Column> = ? AND <OwnerColumn> = ?))
//
// Whether the row was updated is read from LAST_INSERT_ID(token), which is
// only evaluated for a row that matched, and not from the affected-row count,
// which is 0 for a row rewritten with the same values unless the DSN sets
// clientFoundRows. When nothing matched, one more query reads the row's token
// and UpdateToken returns a *[StaleError] (errors.Is(err, [ErrStale])) with
// Resource set to Table, or [ErrNoRow] when no row matches Where at all.
// The token column should be BIGINT UNSIGNED and the owner column a VARBINARY
// (or a binary-collated string) so that owners compare byte for byte.
//
// UpdateToken sets the session's LAST_INSERT_ID(). The Where clause must
// select at most one row.
func UpdateToken(ctx context.Context, q Querier, u Update, token uint64, owner string) error {
	if isNil(q) {
		return ErrNilTx
	}
	if token == 0 {
		return ErrInvalidToken
	}
	if owner == "" {
		return fmt.Errorf("%w: empty", ErrInvalidOwner)
	}
	u, err := u.check("fence_token")
	if err != nil {
		return err
	}
	query := "UPDATE " + u.Table + " SET " + u.Set + ", " +
		u.Column + " = LAST_INSERT_ID(?), " + u.OwnerColumn + " = ?" +
		" WHERE (" + u.Where + ") AND (" + u.Column + " < ? OR (" + u.Column + " = ? AND " + u.OwnerColumn + " = ?))"
	args := make([]any, 0, len(u.SetArgs)+len(u.WhereArgs)+5)
	args = append(args, u.SetArgs...)
	args = append(args, token, owner)
	args = append(args, u.WhereArgs...)
	args = append(args, token, token, owner)
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("fence: update %s: %w", u.Table, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("fence: update %s: %w", u.Table, err)
	}
	if uint64(id) == token {
		return nil
	}
	if id != 0 {
		return fmt.Errorf("%w: update %s answered %d", ErrUnexpected, u.Table, id)
	}
	e := &StaleError{Resource: u.Table, Token: token, Owner: owner}
	var current []byte
	row := q.QueryRowContext(ctx, "SELECT "+u.Column+", "+u.OwnerColumn+" FROM "+u.Table+" WHERE "+u.Where, u.WhereArgs...)
	switch err := row.Scan(&e.Current, &current); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %s WHERE %s", ErrNoRow, u.Table, u.Where)
	case err != nil:
		return fmt.Errorf("%w: %s (reading the current token: %w)", ErrStale, u.Table, err)
	}
	e.CurrentOwner = string(current)
	return e
}

// UpdateVersion runs u on a table whose rows carry an optimistic version
// column: the row is updated only if its version is still version, and the
// update increments it. It returns the new version (version+1). The
// statement is
//
//	UPDATE <Table> SET <Set>, <Column> = LAST_INSERT_ID(<Column> + 1)
//	WHERE (<Where>) AND <Column> = ?
//
// When the row carries another version, UpdateVersion returns a
// *[ConflictError] (errors.Is(err, [ErrConflict])) with the current version,
// or [ErrNoRow] when no row matches Where at all. The version column should
// be BIGINT UNSIGNED. UpdateVersion sets the session's LAST_INSERT_ID(). The
// Where clause must select at most one row.
func UpdateVersion(ctx context.Context, q Querier, u Update, version uint64) (uint64, error) {
	if isNil(q) {
		return 0, ErrNilTx
	}
	u, err := u.check("version")
	if err != nil {
		return 0, err
	}
	query := "UPDATE " + u.Table + " SET " + u.Set + ", " + u.Column + " = LAST_INSERT_ID(" + u.Column + " + 1)" +
		" WHERE (" + u.Where + ") AND " + u.Column + " = ?"
	args := make([]any, 0, len(u.SetArgs)+len(u.WhereArgs)+1)
	args = append(args, u.SetArgs...)
	args = append(args, u.WhereArgs...)
	args = append(args, version)
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("fence: update %s: %w", u.Table, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("fence: update %s: %w", u.Table, err)
	}
	if uint64(id) == version+1 {
		return version + 1, nil
	}
	if id != 0 {
		return 0, fmt.Errorf("%w: update %s answered %d", ErrUnexpected, u.Table, id)
	}
	e := &ConflictError{Table: u.Table, Expected: version}
	err = q.QueryRowContext(ctx, "SELECT "+u.Column+" FROM "+u.Table+" WHERE "+u.Where, u.WhereArgs...).Scan(&e.Current)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("%w: %s WHERE %s", ErrNoRow, u.Table, u.Where)
	case err != nil:
		return 0, fmt.Errorf("%w: %s (reading the current version: %w)", ErrConflict, u.Table, err)
	}
	return 0, e
}
