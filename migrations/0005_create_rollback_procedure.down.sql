-- 0005_create_rollback_procedure.down.sql
DROP PROCEDURE IF EXISTS redfence_rollback
