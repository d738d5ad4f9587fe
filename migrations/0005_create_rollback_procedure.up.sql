-- 0005_create_rollback_procedure.up.sql: rolls back a transaction that
-- redfence_begin opened and restores the session's autocommit and
-- completion_type. Its one row tells, in gone, whether the savepoint sp was
-- still there (0) or gone (1): gone means the transaction that claimed had
-- already ended before this rollback; and, in autocommit, the session's
-- autocommit as the rollback found it: 1 means a statement switched it back
-- on, so statements may have committed on their own since.
CREATE PROCEDURE redfence_rollback(IN sp VARCHAR(64))
BEGIN
    DECLARE gone INT DEFAULT 0;
    DECLARE found_autocommit INT DEFAULT @@autocommit;
    DECLARE CONTINUE HANDLER FOR 1305 SET gone = 1;
    EXECUTE IMMEDIATE CONCAT('RELEASE SAVEPOINT ', sp);
    SET completion_type = 'NO_CHAIN';
    ROLLBACK;
    IF @redfence_session IS NOT NULL THEN
        SET autocommit = IF(SUBSTRING_INDEX(@redfence_session, ',', 1) = '0', 0, 1),
            completion_type = IF(SUBSTRING_INDEX(@redfence_session, ',', -1) IN ('CHAIN', 'RELEASE'),
                                 SUBSTRING_INDEX(@redfence_session, ',', -1), 'NO_CHAIN'),
            @redfence_session = NULL;
    END IF;
    SELECT gone, found_autocommit;
END
