DROP TABLE IF EXISTS shortlink_click_drops;
DROP TABLE IF EXISTS shortlink_clicks;
DROP TABLE IF EXISTS shortlink_creations;
DROP FUNCTION IF EXISTS shortlink_creations_append_only();
DROP TABLE IF EXISTS shortlink_links;
DROP FUNCTION IF EXISTS shortlink_links_guard();
