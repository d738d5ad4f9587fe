-- 0008_create_commit_relay_procedure.down.sql
DROP PROCEDURE IF EXISTS redfence_commit_relay
