"""Rendering: the report's document, page, summary, forest plots, figures, the README's table and the findings page."""
