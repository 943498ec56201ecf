"""The audit trail refuses TRUNCATE too (issue 29, item 14): 0006's row trigger cannot see it, and
TRUNCATE console_auditevent (or of auth_user ... CASCADE) emptied the trail. A test database's
flush disables this trigger around its TRUNCATE (tests/conftest.py); see also
scripts/audit_owner.sql, which gives the table to a role the application does not log in as."""

from django.db import migrations

REFUSE_TRUNCATE = """
CREATE FUNCTION console_auditevent_refuse_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only: TRUNCATE refused'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER console_auditevent_refuse_truncate BEFORE TRUNCATE ON console_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION console_auditevent_refuse_truncate();
"""
ALLOW_TRUNCATE = """
DROP TRIGGER IF EXISTS console_auditevent_refuse_truncate ON console_auditevent;
DROP FUNCTION IF EXISTS console_auditevent_refuse_truncate();
"""


class Migration(migrations.Migration):
    dependencies = [("console", "0006_auditevent")]

    operations = [migrations.RunSQL(REFUSE_TRUNCATE, ALLOW_TRUNCATE)]
