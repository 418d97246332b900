DROP TABLE IF EXISTS file_object;
DROP FUNCTION IF EXISTS file_object_guard();
DROP TABLE IF EXISTS upload_hash;
DROP TABLE IF EXISTS upload_chunk;
DROP TABLE IF EXISTS upload_session;
DROP TABLE IF EXISTS upload_blob;
DROP TABLE IF EXISTS upload_store;
