-- +goose Up
-- The calibration part of the wait a rider was quoted, seconds (rounded as he was quoted it; NULL
-- when no wait was quoted, or for rides quoted before this column): lifecycle folds a ride's
-- residual, request → pickup less the quote without its calibration, into the wait calibration
-- (dispatch.FoldWaitResidual), which needs the calibration the quote held.
ALTER TABLE rides ADD COLUMN quoted_wait_cal_s double precision;

-- +goose Down
ALTER TABLE rides DROP COLUMN quoted_wait_cal_s;
