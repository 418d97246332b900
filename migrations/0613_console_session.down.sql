DROP TABLE IF EXISTS console_session;
