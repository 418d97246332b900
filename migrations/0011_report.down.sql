DROP TABLE report_write;
DROP TABLE report_output;
