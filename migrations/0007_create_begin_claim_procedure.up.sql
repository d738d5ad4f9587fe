-- 0007_create_begin_claim_procedure.up.sql: redfence_begin and the claim in
-- one statement, so that opening the session state of a fenced transaction
-- costs no round trip of its own. It does what redfence_begin does (see
-- 0002), then runs claim, the claim statement guard built with package
-- fence (an UPDATE of the fence row that sets LAST_INSERT_ID to the claim's
-- outcome or the minted token), and answers the session's connection id and
-- that LAST_INSERT_ID (0 when no fence row matched).
-- SQL SECURITY INVOKER: claim runs with the privileges of the caller, never
-- with those of whoever created the procedure, so calling it lets nobody do
-- more than they could with the statement itself. claim is ASCII (guard
-- sends it as a hexadecimal literal), whatever the database's default
-- character set. The session's autocommit is kept as 0 or 1, which is what
-- redfence_commit and redfence_rollback compare it with (@@autocommit reads
-- OFF or ON on MariaDB).
CREATE PROCEDURE redfence_begin_claim(IN sp VARCHAR(64), IN claim TEXT CHARACTER SET ascii)
SQL SECURITY INVOKER
BEGIN
    IF @redfence_session IS NULL THEN
        SET @redfence_session = CONCAT(IF(@@autocommit, 1, 0), ',', @@completion_type);
    END IF;
    SET autocommit = 0, completion_type = 'RELEASE';
    EXECUTE IMMEDIATE CONCAT('SAVEPOINT ', sp);
    DO LAST_INSERT_ID(0);
    EXECUTE IMMEDIATE claim;
    SELECT CONNECTION_ID(), LAST_INSERT_ID();
END
