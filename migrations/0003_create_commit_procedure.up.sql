-- 0003_create_commit_procedure.up.sql: commits a transaction that
-- redfence_begin opened, only if it is still that transaction. RELEASE
-- SAVEPOINT fails with error 1305 when the savepoint sp is gone (the
-- transaction ended and a new one began), and then nothing is committed;
-- otherwise it commits and restores the session's autocommit and
-- completion_type. The restore reads @redfence_session defensively, so that
-- nothing can fail after the COMMIT.
CREATE PROCEDURE redfence_commit(IN sp VARCHAR(64))
BEGIN
    EXECUTE IMMEDIATE CONCAT('RELEASE SAVEPOINT ', sp);
    SET completion_type = 'NO_CHAIN';
    COMMIT;
    SET autocommit = IF(SUBSTRING_INDEX(@redfence_session, ',', 1) = '0', 0, 1),
        completion_type = IF(SUBSTRING_INDEX(@redfence_session, ',', -1) IN ('CHAIN', 'RELEASE'),
                             SUBSTRING_INDEX(@redfence_session, ',', -1), 'NO_CHAIN'),
        @redfence_session = NULL;
END
