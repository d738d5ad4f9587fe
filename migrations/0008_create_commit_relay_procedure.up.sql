-- 0008_create_commit_relay_procedure.up.sql: as redfence_commit_chain, but
-- the new transaction is marked with a savepoint of its own, next, rather
-- than with the name sp of the transaction it follows. guard draws a new
-- name for every transaction, so that a name seen once (in the process
-- list, say) is of no use to forge the proof of another transaction.
CREATE PROCEDURE redfence_commit_relay(IN sp VARCHAR(64), IN next VARCHAR(64))
BEGIN
    EXECUTE IMMEDIATE CONCAT('RELEASE SAVEPOINT ', sp);
    SET completion_type = 'NO_CHAIN';
    COMMIT AND CHAIN;
    SET completion_type = 'RELEASE';
    EXECUTE IMMEDIATE CONCAT('SAVEPOINT ', next);
END
