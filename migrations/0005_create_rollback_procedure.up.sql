-- 0005_create_rollback_procedure.up.sql: rolls back a transaction that
-- redfence_begin opened and restores the session's autocommit and
-- completion_type. Its one row, one column result tells whether the
-- savepoint redfence_tx was still there (0) or gone (1): gone means the
-- transaction that claimed had already ended before this rollback.
CREATE PROCEDURE redfence_rollback()
BEGIN
    DECLARE gone INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR 1305 SET gone = 1;
    RELEASE SAVEPOINT redfence_tx;
    SET completion_type = 'NO_CHAIN';
    ROLLBACK;
    IF @redfence_session IS NOT NULL THEN
        SET autocommit = SUBSTRING_INDEX(@redfence_session, ',', 1),
            completion_type = SUBSTRING_INDEX(@redfence_session, ',', -1),
            @redfence_session = NULL;
    END IF;
    SELECT gone;
END
