-- 0003_create_commit_procedure.down.sql
DROP PROCEDURE IF EXISTS redfence_commit
