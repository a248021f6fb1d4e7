"""The progress judge: scores the active subtask's progress from video, decides done and failed.

`model` (the network), `data` (training segments), `train` (CLI), `checkpoint` (save/load),
`verdict` (done rule, deadlines, whole-video judging), `detector` (the router's "judge" completion
detector) and `evaluate` (judge quality measures, CLI).
"""
