-- A method that gives per-unit uncertainty (a standard deviation
-- in log10 units, its total and its aleatoric and epistemic parts, as
-- units.Uncertainty) has it kept in the prediction cache beside the value,
-- so that a cached unit comes back with the very uncertainty it was
-- computed with. uncertainty_synthetic marks the synthetic engine's
-- stand-in. uncertainty_recorded says the entry was written with the
-- method's uncertainty (set for every entry of such a method, also one
-- whose unit got none): an older entry (FALSE) of a method that now gives
-- uncertainty is a miss, never a value with a blank uncertainty, and the
-- next computation of it replaces it.
ALTER TABLE prediction_cache ADD COLUMN uncertainty_total REAL;
ALTER TABLE prediction_cache ADD COLUMN uncertainty_aleatoric REAL;
ALTER TABLE prediction_cache ADD COLUMN uncertainty_epistemic REAL;
ALTER TABLE prediction_cache ADD COLUMN uncertainty_synthetic BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE prediction_cache ADD COLUMN uncertainty_recorded BOOLEAN NOT NULL DEFAULT FALSE;
