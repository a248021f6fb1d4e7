"""The matched-budget comparison: every method but (f) runs the coach's own RIDI loop over in-process ports.

methods.py     what each method of the comparison is (policy kind, where targets come from, allocation)
ports.py       LocalPorts (CoachPorts without ROS) and the target sources: world model, deployed, priors
runner.py      one (method, arm, seed) run: prepared policy, its rounds, evaluation after every round
end_to_end.py  (f): a policy per composition taught by whole-task demos, on the same schedule, in frames
summary.py     success per budget, Budget AUC, Wilson intervals, paired tests, plots
fidelity.py    `robocoach fidelity`: every modular checkpoint imagined, against its deployed evaluation
"""
