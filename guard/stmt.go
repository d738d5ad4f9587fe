package guard

// stmt.go owns the fast check of a statement fn sends: one that plainly
// ends the transaction is refused before it is sent. Safety does not rest
// on it (see session.go).

import "strings"

// stmtKind says what a statement may do to the transaction it runs in.
type stmtKind int

const (
	// stmtPlain runs inside the transaction and leaves it open.
	stmtPlain stmtKind = iota
	// stmtEnds ends the transaction, explicitly (COMMIT, START TRANSACTION)
	// or by the implicit commit of DDL, LOCK TABLES, account management and
	// the like. Whatever ran before it commits with the claim; whatever runs
	// after it runs outside the fence.
	stmtEnds
	// stmtOpaque runs code the text does not show (CALL, EXECUTE, an
	// executable comment, a compound statement, an unknown verb): it may end
	// the transaction from inside, so Do checks afterwards that it did not.
	stmtOpaque
)

// endsTx lists the leading words of statements that end a transaction on
// MySQL and MariaDB (explicitly or by implicit commit), apart from the verbs
// that classify needs to look further into.
var endsTx = map[string]bool{
	"BEGIN": true, "START": true, "COMMIT": true, "XA": true,
	"ALTER": true, "RENAME": true, "TRUNCATE": true,
	"GRANT": true, "REVOKE": true,
	"LOCK": true, "UNLOCK": true, "BACKUP": true,
	"ANALYZE": true, "OPTIMIZE": true, "REPAIR": true, "CHECK": true,
	"CACHE": true, "FLUSH": true, "RESET": true, "PURGE": true,
	"INSTALL": true, "UNINSTALL": true, "CHANGE": true, "STOP": true,
	"SHUTDOWN": true, "RESTART": true,
}

// plainVerbs lists the leading words of statements that stay inside the
// transaction.
var plainVerbs = map[string]bool{
	"SELECT": true, "INSERT": true, "UPDATE": true, "DELETE": true,
	"REPLACE": true, "WITH": true, "VALUES": true, "TABLE": true,
	"SHOW": true, "DESCRIBE": true, "DESC": true, "EXPLAIN": true,
	"SAVEPOINT": true, "RELEASE": true, "HANDLER": true, "DO": true,
	"HELP": true, "USE": true, "CHECKSUM": true,
}

// classify tells what query may do to the transaction, from its first words.
// It errs on the side of caution: what it cannot read is stmtOpaque, never
// stmtPlain.
func classify(query string) stmtKind {
	words, ok := leadingWords(query, 4)
	if !ok {
		return stmtOpaque
	}
	if len(words) == 0 {
		return stmtPlain // the server answers with a syntax error
	}
	verb := words[0]
	next := func(i int) string {
		if i < len(words) {
			return words[i]
		}
		return ""
	}
	switch {
	case plainVerbs[verb]:
		return stmtPlain
	case endsTx[verb]:
		return stmtEnds
	}
	switch verb {
	case "ROLLBACK":
		// ROLLBACK [WORK] TO [SAVEPOINT] name keeps the transaction.
		if next(1) == "TO" || (next(1) == "WORK" && next(2) == "TO") {
			return stmtPlain
		}
		return stmtEnds
	case "CREATE":
		// CREATE [OR REPLACE] TEMPORARY TABLE commits nothing.
		if next(1) == "TEMPORARY" || (next(1) == "OR" && next(2) == "REPLACE" && next(3) == "TEMPORARY") {
			return stmtPlain
		}
		return stmtEnds
	case "DROP":
		if next(1) == "TEMPORARY" {
			return stmtPlain
		}
		return stmtEnds
	case "LOAD":
		// LOAD DATA and LOAD XML stay in the transaction; LOAD INDEX commits.
		if next(1) == "INDEX" {
			return stmtEnds
		}
		return stmtPlain
	case "SET":
		// Switching autocommit on commits the transaction; switching it off
		// would leave the pooled connection in that mode after Do. SET
		// PASSWORD and SET ROLE DEFAULT (account management) commit too.
		up := strings.ToUpper(query)
		if strings.Contains(up, "AUTOCOMMIT") || next(1) == "PASSWORD" || (next(1) == "DEFAULT" && next(2) == "ROLE") {
			return stmtEnds
		}
		return stmtPlain
	}
	return stmtOpaque // CALL, EXECUTE, PREPARE, compound statements, unknown verbs
}

// leadingWords returns up to n upper-cased words that start query, skipping
// white space, comments and opening parentheses. ok is false when the text
// starts with an executable comment (/*! … */ or /*M! … */), whose content the
// server runs.
func leadingWords(query string, n int) (words []string, ok bool) {
	s := query
	for len(words) < n {
		s = strings.TrimLeft(s, " \t\r\n\f\v(")
		switch {
		case s == "":
			return words, true
		case strings.HasPrefix(s, "/*!"), strings.HasPrefix(s, "/*M!"):
			return words, false
		case strings.HasPrefix(s, "/*"):
			end := strings.Index(s[2:], "*/")
			if end < 0 {
				return words, true
			}
			s = s[2+end+2:]
			continue
		case strings.HasPrefix(s, "#"), strings.HasPrefix(s, "-- "), strings.HasPrefix(s, "--\t"),
			strings.HasPrefix(s, "--\n"), s == "--":
			end := strings.IndexByte(s, '\n')
			if end < 0 {
				return words, true
			}
			s = s[end+1:]
			continue
		}
		i := 0
		for i < len(s) && isWordByte(s[i]) {
			i++
		}
		if i == 0 {
			return words, true // punctuation: the words so far say enough
		}
		words = append(words, strings.ToUpper(s[:i]))
		s = s[i:]
	}
	return words, true
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c == '@' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
