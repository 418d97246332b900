DROP INDEX IF EXISTS upload_session_ended;
