"""What one API request may carry. Beyond these the API answers 400 or 413 with its error body
instead of spending a worker's CPU on it or failing in the database (issue 10)."""

from __future__ import annotations

#: Arrays and objects nested deeper than this in a JSON body: 400 (bodies here are a few levels
#: deep; Python's recursion limit made 1000 levels a 500).
MAX_JSON_DEPTH = 32

#: Characters of SQL in one query: 413. Checking and planning a query costs time in proportion to
#: its tokens (64 KiB of SQL: about 2 s on one core); workbench queries are far shorter.
MAX_SQL_CHARACTERS = 64 * 1024
