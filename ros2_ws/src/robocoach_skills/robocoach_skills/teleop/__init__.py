"""Teleoperated demo sessions: operator devices (sources) and the take/accept/store logic (session)."""
