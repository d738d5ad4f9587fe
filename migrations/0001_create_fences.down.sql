-- 0001_create_fences.down.sql: removes the fence table and every fence in it.
DROP TABLE IF EXISTS redfence_fences
