CREATE INDEX IF NOT EXISTS shortlink_clicks_code ON shortlink_clicks (code);
