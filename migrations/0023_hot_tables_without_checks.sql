-- The hot tables' CHECK constraints and the attempts' foreign key go
-- (issue 28; docs/performance.md "What PostgreSQL spends per statement").
--
-- PostgreSQL 15 prepares a table's CHECK constraints again for every
-- statement that writes the table: it parses each one from its stored text
-- (stringToNode) and plans it before the first row is checked. A claim, a
-- completion and a submit each write tasks (a completion task_attempts too),
-- a few rows a statement when one worker takes one task at a time: in the
-- single-task benchmark the checks were 6 % of PostgreSQL's CPU and the
-- foreign key's check of every new attempt (a query per row, through SPI)
-- another 3.6 %.
--
-- What they guarded stays guarded where it is decided: only Taskmaster's
-- statements write these tables; the values they write come from the
-- domain (task.Task's state machine, task.SubmitParams' validation, the
-- attempt outcomes), and the statements that write without the domain are
-- checked to agree with it (TestClaimStatementAgreesWithTheDomain,
-- TestCompleteStatementAgreesWithTheDomain). Every test database is
-- checked against the rules below when its test ends (pgtest), so a
-- statement that breaks one fails the suite instead of the service.
-- The other tables, written rarely, keep their constraints.
ALTER TABLE tasks
    DROP CONSTRAINT tasks_status_check,          -- status IN (PENDING, RUNNING, DONE, DEAD, BLOCKED)
    DROP CONSTRAINT tasks_max_attempts_check,    -- max_attempts BETWEEN 1 AND 100
    DROP CONSTRAINT tasks_group_key_check,       -- char_length(group_key) BETWEEN 1 AND 128
    DROP CONSTRAINT tasks_retry_policy,          -- retry columns all NULL or all set, jitter none or full
    DROP CONSTRAINT tasks_schedule_mark;         -- (schedule_name IS NULL) = (schedule_tick IS NULL)
ALTER TABLE task_attempts
    DROP CONSTRAINT task_attempts_outcome_check,     -- one of task.Outcome's values
    DROP CONSTRAINT task_attempts_http_status_check, -- http_status BETWEEN 100 AND 599
    DROP CONSTRAINT task_attempts_task_id_fkey;      -- task_id REFERENCES tasks ON DELETE CASCADE

-- Deleting tasks still deletes their attempts (the foreign key's ON DELETE
-- CASCADE), whoever deletes them: retention, a purge, an operator. A
-- statement-level trigger costs nothing to the statements that insert or
-- update tasks and one join per DELETE statement, however many rows it
-- deletes. An attempt is only ever written by a statement that holds its
-- task's row lock, so none can be written for a task being deleted.
CREATE FUNCTION tasks_delete_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM task_attempts a USING deleted_tasks d WHERE a.task_id = d.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_delete_attempts
    AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS deleted_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION tasks_delete_attempts();
