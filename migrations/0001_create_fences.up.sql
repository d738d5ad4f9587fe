-- 0001_create_fences.up.sql: the fence table read and written by fence.Claim.
-- resource and owner are byte strings (VARBINARY) so that 'A' and 'a', or
-- 'k' and 'k ', are different, as they are for Redis keys.
CREATE TABLE IF NOT EXISTS redfence_fences (
    resource   VARBINARY(191)  NOT NULL,
    token      BIGINT UNSIGNED NOT NULL,
    owner      VARBINARY(191)  NOT NULL DEFAULT '',
    op_id      VARBINARY(191)  NOT NULL DEFAULT '',
    claims     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (resource)
) ENGINE = InnoDB
