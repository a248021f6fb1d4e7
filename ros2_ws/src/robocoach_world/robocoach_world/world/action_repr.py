"""The embodiment-agnostic action representation CoachWorld is conditioned on.

A padded joint-space vector of either arm (joint targets or joint positions + gripper, see
`robocoach_skills.action_contract`) becomes the pose of the tool centre point it puts the hand at,
plus the gripper value: (..., 3 + 6 + 1) = position [m], 6D rotation (the first two columns of the
rotation matrix, continuous unlike quaternions or Euler angles), gripper [0..1]. Two arms asking for
the same hand pose get the same vector, so one dynamics model serves both; the arm's identity
(`action_contract.robot_id`) travels separately as an embedding.

The forward kinematics is `robocoach_skills.kinematics` (each arm's MuJoCo kinematic tree as batched
torch, on the model's device), shared with the experts that act in hand space.

>>> from robocoach_skills.action_contract import ACTION_DIM
>>> kin = AgnosticKinematics()
>>> q = torch.zeros(2, ACTION_DIM)
>>> kin.encode(q, torch.tensor([0, 1])).shape
torch.Size([2, 10])
"""

from __future__ import annotations

import torch

from robocoach_skills.kinematics import ArmKinematics

REPR_DIM = 3 + 6 + 1  # TCP position, 6D rotation, gripper


class AgnosticKinematics(ArmKinematics):
    """Padded joint vectors of any arm mix -> agnostic (..., REPR_DIM) vectors (module docstring)."""

    def encode(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> torch.Tensor:
        """(..., ACTION_DIM), (...) -> (..., REPR_DIM): TCP position, 6D rotation, gripper (last channel)."""
        pos, rot = self.tcp_pose(padded, robot_ids)
        six_d = rot[..., :, :2].transpose(-1, -2).reshape(*pos.shape[:-1], 6)  # columns x, y
        return torch.cat([pos, six_d, padded[..., -1:]], dim=-1)
