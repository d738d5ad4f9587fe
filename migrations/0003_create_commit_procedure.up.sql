-- 0003_create_commit_procedure.up.sql: commits a transaction that
-- redfence_begin opened, only if it is still that transaction. RELEASE
-- SAVEPOINT fails with error 1305 when the savepoint is gone (the
-- transaction ended and a new one began), and then nothing is committed;
-- otherwise it commits and restores the session's autocommit and
-- completion_type.
CREATE PROCEDURE redfence_commit()
BEGIN
    RELEASE SAVEPOINT redfence_tx;
    SET completion_type = 'NO_CHAIN';
    COMMIT;
    SET autocommit = SUBSTRING_INDEX(@redfence_session, ',', 1),
        completion_type = SUBSTRING_INDEX(@redfence_session, ',', -1),
        @redfence_session = NULL;
END
