"""What each epoch end computes: which epochs (:mod:`.schedule`), what the time budget leaves in
(:mod:`.budget`), the table of scores (:mod:`.scores`), explaining and scoring in chunks
(:mod:`.compute`) into typed per-probe records (:mod:`.record`), sharding and gathering them
(:mod:`.distributed`), drift (:mod:`.drift`) and the live transplant test (:mod:`.transplant`)."""
