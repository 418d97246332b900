DROP TABLE IF EXISTS notify_review_decision;
DROP FUNCTION IF EXISTS notify_review_decision_append_only();
DROP TABLE IF EXISTS notify_attempt;
DROP FUNCTION IF EXISTS notify_attempt_append_only();
DROP TABLE IF EXISTS notify_task;
DROP TABLE IF EXISTS notify_notification;
DROP TABLE IF EXISTS notify_preference;
DROP TABLE IF EXISTS notify_user;
