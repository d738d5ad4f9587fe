CREATE TABLE IF NOT EXISTS orders (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    order_id   VARCHAR(64) NOT NULL,
    sku        VARCHAR(64) NOT NULL,
    qty        INT NOT NULL,
    instance   VARCHAR(64) NOT NULL,
    token      BIGINT UNSIGNED NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY orders_order_id (order_id),
    KEY orders_sku (sku)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
