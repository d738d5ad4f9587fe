-- 0006_add_previous_claim.down.sql
ALTER TABLE redfence_fences DROP COLUMN prev_op_id, DROP COLUMN prev_token
