-- The catch-up creates nothing of its own: what it repeats belongs to
-- 0502, whose down file restores the index.
SELECT 1;
