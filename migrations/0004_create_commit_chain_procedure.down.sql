-- 0004_create_commit_chain_procedure.down.sql
DROP PROCEDURE IF EXISTS redfence_commit_chain
