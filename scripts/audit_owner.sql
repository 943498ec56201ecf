-- The audit trail owned by a role the application does not log in as (issue 29, item 14).
--
-- The owner of a table may ALTER it, DISABLE its triggers, DROP them or replace their functions,
-- and the owner of its schema may DROP it; while the application's role owns console_auditevent
-- and the public schema (it made the database), anything that runs SQL as that role can empty the
-- trail. Run as a superuser on Lakewarden's database, after `manage.py migrate`:
--
--   psql -v owner=lakewarden_audit -v app_role=lakewarden -d lakewarden -f scripts/audit_owner.sql
--
-- It creates the owner role (NOLOGIN) when it is missing, gives it the table, its two trigger
-- functions and the public schema, and leaves the application role SELECT, INSERT and UPDATE of
-- user_id on the table (set to NULL when a user is deleted; the trigger refuses any other change)
-- and USAGE and CREATE on the schema (its own tables stay its own: migrations work as before). scripts/setup.sh runs it when
-- LAKEWARDEN_AUDIT_OWNER_ROLE is set. With owner = app_role it gives the table back to the
-- application role (set-up does so before migrations that may alter the table, then takes it
-- again). Nothing happens before the table exists.
\set ON_ERROR_STOP 1
SELECT set_config('lakewarden.audit_owner', :'owner', false),
       set_config('lakewarden.app_role', :'app_role', false) \g /dev/null
DO $$
DECLARE
    owner text := current_setting('lakewarden.audit_owner');
    app text := current_setting('lakewarden.app_role');
    function text;
BEGIN
    IF to_regclass('console_auditevent') IS NULL THEN
        RAISE NOTICE 'console_auditevent does not exist yet: run manage.py migrate first';
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = app) THEN
        RAISE EXCEPTION 'the application role % does not exist', app;
    END IF;
    IF owner <> app THEN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = owner) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', owner);
        END IF;
        IF (SELECT rolsuper FROM pg_roles WHERE rolname = app) THEN
            RAISE EXCEPTION 'the application role % is a superuser: no owner can stop it', app;
        END IF;
        IF pg_has_role(app, owner, 'MEMBER') THEN
            RAISE EXCEPTION 'the application role % is a member of %: it could still alter the audit trail', app, owner;
        END IF;
    END IF;
    EXECUTE format('ALTER TABLE console_auditevent OWNER TO %I', owner);
    FOREACH function IN ARRAY ARRAY['console_auditevent_append_only()', 'console_auditevent_refuse_truncate()'] LOOP
        IF to_regprocedure(function) IS NOT NULL THEN  -- (the second comes with console 0007)
            EXECUTE format('ALTER FUNCTION %s OWNER TO %I', function, owner);
        END IF;
    END LOOP;
    IF owner <> app THEN
        EXECUTE format('ALTER SCHEMA public OWNER TO %I', owner);
        EXECUTE format('GRANT USAGE, CREATE ON SCHEMA public TO %I', app);
        EXECUTE format('REVOKE ALL ON console_auditevent FROM %I', app);
        EXECUTE format('GRANT SELECT, INSERT ON console_auditevent TO %I', app);
        EXECUTE format('GRANT UPDATE (user_id) ON console_auditevent TO %I', app);
    END IF;
END $$;
