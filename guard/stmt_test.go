package guard

import "testing"

func TestClassify(t *testing.T) {
	cases := []struct {
		q    string
		want stmtKind
	}{
		{"SELECT 1", stmtPlain},
		{"  select n from counters where id = ?", stmtPlain},
		{"(SELECT 1) UNION (SELECT 2)", stmtPlain},
		{"INSERT INTO t VALUES (1)", stmtPlain},
		{"update t set a = 1", stmtPlain},
		{"WITH x AS (SELECT 1) SELECT * FROM x", stmtPlain},
		{"/* note */ DELETE FROM t", stmtPlain},
		{"-- note\nDELETE FROM t", stmtPlain},
		{"# note\nUPDATE t SET a = 1", stmtPlain},
		{"SAVEPOINT a", stmtPlain},
		{"RELEASE SAVEPOINT a", stmtPlain},
		{"ROLLBACK TO SAVEPOINT a", stmtPlain},
		{"rollback work to a", stmtPlain},
		{"CREATE TEMPORARY TABLE t (id INT)", stmtPlain},
		{"CREATE OR REPLACE TEMPORARY TABLE t (id INT)", stmtPlain},
		{"DROP TEMPORARY TABLE t", stmtPlain},
		{"LOAD DATA LOCAL INFILE 'x' INTO TABLE t", stmtPlain},
		{"SET @x = 1", stmtPlain},
		{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", stmtPlain},
		{"", stmtPlain},

		{"START TRANSACTION", stmtEnds},
		{"start transaction with consistent snapshot", stmtEnds},
		{"BEGIN", stmtEnds},
		{"begin work", stmtEnds},
		{"BEGIN NOT ATOMIC SELECT 1; END", stmtEnds},
		{"COMMIT", stmtEnds},
		{"commit and chain", stmtEnds},
		{"ROLLBACK", stmtEnds},
		{"rollback work", stmtEnds},
		{"ROLLBACK AND CHAIN", stmtEnds},
		{"CREATE TABLE IF NOT EXISTS x (id INT)", stmtEnds},
		{"/* hidden */ create table x (id int)", stmtEnds},
		{"\n\t-- why\n  CREATE INDEX i ON t (a)", stmtEnds},
		{"CREATE OR REPLACE TABLE x (id INT)", stmtEnds},
		{"DROP TABLE x", stmtEnds},
		{"ALTER TABLE t ADD COLUMN c INT", stmtEnds},
		{"TRUNCATE TABLE t", stmtEnds},
		{"RENAME TABLE a TO b", stmtEnds},
		{"LOCK TABLES t WRITE", stmtEnds},
		{"UNLOCK TABLES", stmtEnds},
		{"SET autocommit = 1", stmtEnds},
		{"SET @@session.autocommit=0", stmtEnds},
		{"set SESSION AUTOCOMMIT = ON", stmtEnds},
		{"SET PASSWORD = PASSWORD('x')", stmtEnds},
		{"GRANT SELECT ON *.* TO u", stmtEnds},
		{"XA START 'x'", stmtEnds},
		{"ANALYZE TABLE t", stmtEnds},
		{"OPTIMIZE TABLE t", stmtEnds},
		{"FLUSH TABLES", stmtEnds},
		{"LOAD INDEX INTO CACHE t", stmtEnds},

		{"CALL p()", stmtOpaque},
		{"EXECUTE s", stmtOpaque},
		{"PREPARE s FROM 'COMMIT'", stmtOpaque},
		{"/*!40101 COMMIT */", stmtOpaque},
		{"/*M!100100 CREATE TABLE x (a INT) */", stmtOpaque},
		{"IF 1 THEN COMMIT; END IF", stmtOpaque},
		{"FROBNICATE", stmtOpaque},
	}
	for _, c := range cases {
		if got := classify(c.q); got != c.want {
			t.Errorf("classify(%q) = %d, want %d", c.q, got, c.want)
		}
	}
}
