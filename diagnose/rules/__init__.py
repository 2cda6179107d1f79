"""The rule engine: the pack (rules/*.toml) loaded and checked (:mod:`.engine`), the safe
condition language its ``when`` clauses are written in (:mod:`.condition`), and the
message templates that quote the evidence (:mod:`.message`)."""
