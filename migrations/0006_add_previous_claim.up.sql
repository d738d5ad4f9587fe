-- 0006_add_previous_claim.up.sql: every accepted claim keeps the token and
-- operation id it replaced, so that an attempt's outcome can be read from the
-- row even after the next holder's claim has replaced its own: the claim
-- right after a committed one names it in prev_op_id, and the claim right
-- after one that was rolled back names an older token in prev_token.
ALTER TABLE redfence_fences
    ADD COLUMN prev_token BIGINT UNSIGNED NOT NULL DEFAULT 0 AFTER op_id,
    ADD COLUMN prev_op_id VARBINARY(191) NOT NULL DEFAULT '' AFTER prev_token
