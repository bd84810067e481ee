-- Released attempts (issue 29): a stopping worker hands its task back
-- (POST /tasks/v1/{id}/release) without spending the attempt, which ends
-- with outcome 'released'. The wider check is added NOT VALID so that the
-- migration does not scan task_attempts under its exclusive lock: every
-- existing row satisfied the old, narrower check, so none can break the new
-- one, and new rows are checked as usual.
ALTER TABLE task_attempts DROP CONSTRAINT task_attempts_outcome_check;
ALTER TABLE task_attempts ADD CONSTRAINT task_attempts_outcome_check
    CHECK (outcome IN ('completed', 'failed', 'lease_expired', 'orphaned', 'worker_dead',
        'cancelled', 'snoozed', 'released')) NOT VALID;
