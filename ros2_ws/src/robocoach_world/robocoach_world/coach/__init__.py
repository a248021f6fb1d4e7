"""The RIDI coach's plain-Python core (no rclpy): diagnose judged trials, allocate demos, keep the
coach state crash-safe, retrain the requested experts, and write the operator scorecard and plots.

The coach node, the imagination loop and the main job are thin layers over these modules.
Checks: python -m pytest tests/coach -q
"""
