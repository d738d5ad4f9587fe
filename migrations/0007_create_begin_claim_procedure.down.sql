-- 0007_create_begin_claim_procedure.down.sql
DROP PROCEDURE IF EXISTS redfence_begin_claim
