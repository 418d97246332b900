ALTER TABLE job RESET (fillfactor);
