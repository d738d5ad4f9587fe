-- 0004_create_commit_chain_procedure.up.sql: as redfence_commit, but begins
-- the next transaction in the same round trip (COMMIT AND CHAIN), for a
-- connection passed on to the key's next caller. The session stays as
-- redfence_begin set it, and the new transaction is marked with its own
-- redfence_tx savepoint, as redfence_begin would: the next caller claims at
-- once.
CREATE PROCEDURE redfence_commit_chain()
BEGIN
    RELEASE SAVEPOINT redfence_tx;
    SET completion_type = 'NO_CHAIN';
    COMMIT AND CHAIN;
    SET completion_type = 'RELEASE';
    SAVEPOINT redfence_tx;
END
