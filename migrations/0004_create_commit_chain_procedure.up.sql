-- 0004_create_commit_chain_procedure.up.sql: as redfence_commit, but begins
-- the next transaction in the same round trip (COMMIT AND CHAIN), for a
-- connection passed on to the key's next caller. The session stays as
-- redfence_begin set it, and the new transaction is marked with the
-- savepoint sp, as redfence_begin would: the next caller claims at once.
CREATE PROCEDURE redfence_commit_chain(IN sp VARCHAR(64))
BEGIN
    EXECUTE IMMEDIATE CONCAT('RELEASE SAVEPOINT ', sp);
    SET completion_type = 'NO_CHAIN';
    COMMIT AND CHAIN;
    SET completion_type = 'RELEASE';
    EXECUTE IMMEDIATE CONCAT('SAVEPOINT ', sp);
END
