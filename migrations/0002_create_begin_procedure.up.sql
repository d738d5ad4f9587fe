-- 0002_create_begin_procedure.up.sql: opens the session state guard runs a
-- fenced transaction in, as its first statement after START TRANSACTION.
-- autocommit = 0: a statement that runs after the transaction ended unseen
-- (a deadlock's rollback, an implicit commit) opens a new transaction
-- instead of committing on its own. completion_type = RELEASE: a COMMIT or
-- ROLLBACK that fn sends ends the session, so nothing of fn runs after it.
-- The savepoint named sp marks the transaction: it exists only in the
-- transaction that created it, and redfence_commit proves with it that the
-- transaction it commits is the one that claimed. sp is a name the caller
-- keeps to itself (guard draws one at random per Guard), so that the
-- statements it guards can neither roll back to it nor make it again. The
-- session's own autocommit and completion_type are kept in
-- @redfence_session (once, so that a transaction chained by
-- redfence_commit_chain keeps the original) and put back by
-- redfence_commit and redfence_rollback. It answers the session's
-- connection id, with which Do ends a statement the server would otherwise
-- keep waiting after the caller gave up (KILL).
CREATE PROCEDURE redfence_begin(IN sp VARCHAR(64))
BEGIN
    IF @redfence_session IS NULL THEN
        SET @redfence_session = CONCAT(@@autocommit, ',', @@completion_type);
    END IF;
    SET autocommit = 0, completion_type = 'RELEASE';
    EXECUTE IMMEDIATE CONCAT('SAVEPOINT ', sp);
    SELECT CONNECTION_ID();
END
