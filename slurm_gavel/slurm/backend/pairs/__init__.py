"""Space sharing (docs/space-sharing.md): two jobs on one GPU's shards, a pair row.

sharing.py  what a pair row is and asks, as functions of a poll's snapshot
room.py     where Slurm's first fit puts a pair's halves
multi.py    pairs of multi-GPU jobs (23.11+): when, the update fields, requests kept
placing.py  where a pair may be released now, reading Slurm's placement back
"""
