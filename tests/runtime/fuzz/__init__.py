"""Structure-aware fuzzing of .ember files (see README, developer notes).

`mutate` edits a program through its flatbuffer object tree (fields, vector lengths, union
tags, instruction order, metadata values), the reference delegate's blob field by field, and
the packed bytes; `harness` runs each mutant in a forked child with an address-space limit.
Neither module imports torch.
"""
