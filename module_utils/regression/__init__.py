"""Regression suites and acceptance runs: gates, reports and their charts (over base/, verl/ and jobs/)."""
