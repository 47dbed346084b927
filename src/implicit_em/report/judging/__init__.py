"""Judging and statistics: rules over criteria and gates, intervals over seeds, known-answer controls, item verdicts, replication and judging a report again."""
