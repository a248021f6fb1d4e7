"""The matched-budget comparison: every method runs the coach's own RIDI loop over in-process ports.

methods.py  what each method of the comparison is (policy kind, where targets come from, allocation)
ports.py    LocalPorts (CoachPorts without ROS) and the target sources: world model, deployed, priors
runner.py   one (method, arm, seed) run: prepared experts, the Coach, evaluation after every round
summary.py  success per budget, Budget AUC, Wilson intervals, paired tests, plots
"""
