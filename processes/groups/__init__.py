"""Resource groups (issue 31): named groups of tables, each with its own Celery queue (so its own
workers), a concurrency budget (processes at once) and a compute budget (worker-seconds per rolling
hour).

models.py holds the rows; membership.py answers "which group is this table in" (explicit
assignment, then namespace pattern, then catalog, then ``default``); budget.py admits a process to
its group under a row lock so no budget is ever exceeded; services.py creates, changes and deletes
groups with their bad-input rules; capacity.py reads what the capacity page shows (workers, queue
depth, backlog, budget used and left).
"""
