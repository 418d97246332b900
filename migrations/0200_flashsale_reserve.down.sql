DROP TABLE IF EXISTS flashsale_stock_move;
DROP FUNCTION IF EXISTS flashsale_stock_move_append_only();
DROP TABLE IF EXISTS flashsale_reservation;
DROP FUNCTION IF EXISTS flashsale_reservation_guard();
DROP TABLE IF EXISTS flashsale_sku;
