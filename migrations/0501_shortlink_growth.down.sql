DROP INDEX IF EXISTS shortlink_click_drops_flushed_at; DROP INDEX IF EXISTS shortlink_clicks_clicked_at; DROP TABLE IF EXISTS shortlink_click_count;
