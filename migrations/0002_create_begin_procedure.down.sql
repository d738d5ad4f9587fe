-- 0002_create_begin_procedure.down.sql
DROP PROCEDURE IF EXISTS redfence_begin
