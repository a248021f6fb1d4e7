"""CoachWorld: one stochastic, action-conditioned latent video model for every skill and both arms.

Structure (SVG-LP / RSSM-like, small enough for a CPU, wider by `WorldConfig` on a GPU):

    observe:  frames + proprio of a short real history -> per-frame embeddings -> GRU -> h_0,
              plus multi-scale conv features of the last real frame (decoder skips: the static scene),
              kept as the decoder's convolution of them (`Decoder.skip_terms`: fixed over a rollout)
    imagine:  for each action a_k (padded joint targets, turned into TCP pose + gripper by
              `action_repr`, plus the arm's embedding):
                  z_k ~ prior(h_k, a_k)              learned Gaussian prior over a latent noise variable
                  h_{k+1} = GRUCell([z_k, a_k], h_k)  the deterministic path never sees a real future frame
                  proprio_{k+1} = a_k + delta(h_{k+1}) on the arm's channels (servos track their targets)
                  gripper_{k+1}: with `gripper_modes`, one of two readings, "free" (the command + delta, as
                                the joints) or "blocked" (something between the fingers holds them at a
                                predicted width), chosen where the row's draw u < p_blocked(h_{k+1})
                  frame_{k+1} = decoder(h_{k+1}, skips, sketch(proprio_{k+1})), composited over the last
                                real frame by a predicted mask (the scene stays put unless something
                                moves it); the sketch draws where the arm is (`arm_sketch.py`)
    training: z_k from the posterior q(z_k | h_k, a_k, frame_{k+1}) with KL(q || prior); for a fraction
              of sequences from the prior, so the free-running path is trained as it is used.

Different `torch.Generator` seeds draw different z sequences, hence different plausible futures; the
same seed reproduces a rollout exactly. The gripper reading has two modes because a hand closing at a
cube may close on it (reads the cube's width) or beside it (reads 0): one regressed reading averaged
them into a "holding" 0.3 that the grasp check passed where the robot's fingers closed on nothing
(session 41). Each rollout draws one u ~ U(0, 1) at its first `imagine` call and keeps it: its fingers
are blocked on the steps where p_blocked > u, so rollouts differ in their grasps (where p_blocked hovers
near u, the reading flickers between the modes; docs/world.md). `imagine` keeps no autograd graph.

    model = CoachWorld(WorldConfig())
    state = model.observe(images, proprio, robot_ids)               # (B, Th, 64, 64, 3) uint8, (B, Th, 8)
    state, frames, proprio = model.imagine(state, actions, robot_ids, generator)  # actions (B, K, 8)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import pairwise
from typing import NamedTuple

import torch
from torch import nn

from robocoach_skills.action_contract import ACTION_DIM, channel_mask
from robocoach_skills.constants import ROBOTS
from robocoach_world.world.action_repr import REPR_DIM, AgnosticKinematics
from robocoach_world.world.arm_sketch import SKETCH_CHANNELS, ArmSketch

GROUPS = 4  # GroupNorm groups in every conv stage
MASK_BIAS = -3.0  # initial logit of the generated-pixel mask: start close to copying the context frame
LEGACY_VALUES = {"gripper_modes": False}  # WorldConfig fields checkpoints written before them lack


@dataclass
class WorldConfig:
    """Model size; the defaults train in minutes on one CPU thread, a GPU takes wider ones."""

    image_size: int = 64  # square frame edge [px]; must be divisible by 2**len(channels)
    channels: tuple[int, ...] = (8, 16, 32, 64)  # conv widths, each stage halves the resolution
    embed_dim: int = 256  # per-frame embedding (image + proprio)
    hidden_dim: int = 256  # deterministic state h
    latent_dim: int = 16  # stochastic z per step
    robot_dim: int = 16  # arm-identity embedding
    min_std: float = 0.05  # floor of the prior/posterior std (keeps sampling and KL well conditioned)
    arm_sketch: bool = True  # condition the decoder on where the arm is, then and in the context frame
    sketch_link_width: float = 0.025  # std of the sketch's link ridges, as a fraction of the image edge
    sketch_hand_width: float = 0.03  # std of the sketch's hand blob, as a fraction of the image edge
    gripper_modes: bool = True  # the gripper reading as a free / blocked mixture (module docstring)

    def __post_init__(self) -> None:
        self.channels = tuple(self.channels)
        if not self.channels or any(c < 1 or c % GROUPS for c in self.channels):
            raise ValueError(
                f"WorldConfig.channels must be positive multiples of {GROUPS}, got {self.channels!r}"
            )
        if self.image_size % (2 ** len(self.channels)) or self.image_size < 2 ** len(self.channels):
            raise ValueError(
                f"WorldConfig.image_size {self.image_size!r} is not a multiple of 2**{len(self.channels)}"
            )
        for name in ("embed_dim", "hidden_dim", "latent_dim", "robot_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"WorldConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if not self.min_std > 0:
            raise ValueError(f"WorldConfig.min_std must be positive, got {self.min_std!r}")

    @classmethod
    def from_dict(cls, values: dict) -> WorldConfig:
        """Inverse of `dataclasses.asdict`; unknown or missing keys raise ValueError (keys added since a
        checkpoint was written take the value its model was built with, `LEGACY_VALUES`)."""
        values = {**{k: v for k, v in LEGACY_VALUES.items() if k not in values}, **values}
        names = {f.name for f in fields(cls)}
        if set(values) != names:
            raise ValueError(
                f"WorldConfig keys differ: extra {set(values) - names}, missing {names - set(values)}"
            )
        return cls(**values)


@dataclass
class LossConfig:
    """Training objective and the robustness noise (see `CoachWorld.forward`)."""

    kl_weight: float = 1e-3  # weight of KL(posterior || prior) [per nat] against the image MSE
    free_nats: float = 0.5  # KL per step below this is not penalised (keeps z informative)
    proprio_weight: float = 0.1  # weight of the joints' MSE [per rad^2]
    # Weight of the gripper reading's squared error [per unit of opening^2]: the one proprio channel the
    # scene decides (a cube between the fingers holds them at 0.45 while the command says 0). Averaged in
    # with the joints, CoachWorld let a held grasp's reading decay towards the command (0.45 -> 0.1-0.3
    # over a replayed pick), so the grasp check failed every imagined pick (session 34).
    gripper_weight: float = 0.1
    # With `gripper_modes`: each mode's reading error [units of opening] in the mixture's likelihood. The
    # term is 2 std^2 x its negative log-likelihood, which is the squared error where one mode is sure.
    gripper_std: float = 0.05
    prior_fraction: float = 0.25  # share of sequences rolled out on prior samples (as in imagination)
    history_noise: float = 0.05  # max std of pixel noise on history frames (drawn per sequence)
    latent_noise: float = 0.01  # std of noise added to h after every step
    vary_history: bool = True  # train on the last 1..Th history frames (drawn per batch), not always Th
    # Extra weight of pixels that change from the last real frame: the arm is a few percent of the
    # frame, so plain MSE is met by copying the last frame (0: plain MSE over the frame).
    motion_weight: float = 0.0
    motion_threshold: float = 0.05  # change of a pixel (max over RGB, in [0, 1]) that counts as motion

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"LossConfig.{f.name} must be >= 0, got {getattr(self, f.name)!r}")
        if self.prior_fraction > 1:
            raise ValueError(f"LossConfig.prior_fraction must be <= 1, got {self.prior_fraction!r}")


@dataclass
class WorldState:
    """What the model carries between `imagine` calls, batched on the model's device."""

    h: torch.Tensor  # (B, hidden_dim) deterministic state after the last real or imagined frame
    context: torch.Tensor  # (B, 3, S, S) float [0, 1], the last real frame (what the decoder composites over)
    skip_terms: tuple[torch.Tensor, ...]  # `Decoder.skip_terms` of that frame, one per decoder stage
    robot_ids: torch.Tensor  # (B,) long, index into constants.ROBOTS
    grasp_draw: torch.Tensor | None = None  # (B,) u ~ U(0, 1) picking the gripper mode; None: not drawn

    def select(self, index: torch.Tensor) -> WorldState:
        """Rows `index` (long (N,)): to drop, reorder or repeat rollouts, e.g. one per seed."""
        terms = tuple(t[index] for t in self.skip_terms)
        draw = None if self.grasp_draw is None else self.grasp_draw[index]
        return WorldState(self.h[index], self.context[index], terms, self.robot_ids[index], draw)


class GripperModes(NamedTuple):
    """The gripper reading's two modes, each (B, K): where something blocks the fingers, and where not."""

    p_blocked: torch.Tensor  # probability that the fingers are blocked
    blocked: torch.Tensor  # the reading they are blocked at (0 closed .. 1 open)
    free: torch.Tensor  # the reading of unblocked fingers: the command + a learned delta

    def reading(self, draw: torch.Tensor | None) -> torch.Tensor:
        """The mode each row's draw (B,) picks; no draw: the mixture's mean."""
        if draw is None:
            return self.p_blocked * self.blocked + (1 - self.p_blocked) * self.free
        return torch.where(draw[:, None] < self.p_blocked, self.blocked, self.free)


def _block(c_in: int, c_out: int, transpose: bool) -> nn.Sequential:
    conv = nn.ConvTranspose2d if transpose else nn.Conv2d
    return nn.Sequential(conv(c_in, c_out, 4, 2, 1), nn.GroupNorm(GROUPS, c_out), nn.SiLU())


class Encoder(nn.Module):
    """(N, 3, S, S) in [0, 1] -> embedding (N, embed_dim) and the per-stage feature maps."""

    def __init__(self, config: WorldConfig) -> None:
        super().__init__()
        widths = (3, *config.channels)
        self.stages = nn.ModuleList(_block(a, b, False) for a, b in pairwise(widths))
        side = config.image_size // 2 ** len(config.channels)
        self.out = nn.Linear(config.channels[-1] * side * side, config.embed_dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return self.out(x.flatten(1)), tuple(feats)


class Decoder(nn.Module):
    """h (N, hidden_dim) + the context frame and its skip features -> frame (N, 3, S, S) in [0, 1].

    The output composites generated pixels over the context frame through a predicted mask: most of
    the scene stays where it was, so the network spends its capacity on what moves. The mask starts
    mostly closed (the copy-last-frame prediction) and opens where training shows motion.

    With `WorldConfig.arm_sketch`, every stage also convolves [sketch of the frame's arm, sketch of the
    context frame's arm] at its output resolution (3x3, added before the norm). The sketches are drawn
    at the last stage's resolution (half the frame's edge) and averaged down for the earlier ones; the
    full-resolution head reads the arm from the last stage, which keeps the sketches cheap.
    """

    def __init__(self, config: WorldConfig) -> None:
        super().__init__()
        c = config.channels
        self.side = config.image_size // 2 ** len(c)
        self.inp = nn.Linear(config.hidden_dim, c[-1] * self.side * self.side)
        ins = tuple(reversed(c))  # stage i concatenates the skip of the same resolution (width ins[i])
        self.stages = nn.ModuleList(_block(2 * i, o, True) for i, o in pairwise(ins))
        # The full-resolution stage writes RGB + mask directly: it is the most expensive one per channel.
        self.head = nn.ConvTranspose2d(2 * c[0], 4, 4, 2, 1)
        nn.init.constant_(self.head.bias[3], MASK_BIAS)
        self.sketch_size = config.image_size // 2  # the last stage's output edge
        outs = ins[1:] if config.arm_sketch else ()
        self.sketch_convs = nn.ModuleList(nn.Conv2d(2 * SKETCH_CHANNELS, o, 3, padding=1) for o in outs)

    def skip_terms(
        self, skips: tuple[torch.Tensor, ...], context_sketch: torch.Tensor | None
    ) -> tuple[torch.Tensor, ...]:
        """The skip half of every stage's transposed convolution (bias included), one per stage + head.

        Each stage convolves [x, skip]; that is linear, so it splits into conv(x) + conv(skip). The
        skips come from the context frame and stay fixed over a rollout: computed once here, they
        halve the convolution work of every decoded frame. The context frame's arm sketch
        (N, 3, S/2, S/2) (None without `arm_sketch`) is fixed too and joins the same terms.
        """
        convs = [stage[0] for stage in self.stages] + [self.head]
        terms = [
            _conv_transpose(conv, skip, conv.in_channels - skip.shape[1], conv.bias)
            for conv, skip in zip(convs, reversed(skips), strict=True)
        ]
        for i, conv in enumerate(self.sketch_convs):
            sketch = self._at(context_sketch, terms[i].shape[-1])
            terms[i] = terms[i] + _conv(conv, sketch, SKETCH_CHANNELS, conv.bias)
        return tuple(terms)

    def _at(self, sketch: torch.Tensor, side: int) -> torch.Tensor:
        """A sketch (sketch_size) averaged down to side x side."""
        factor = self.sketch_size // side
        return sketch if factor == 1 else nn.functional.avg_pool2d(sketch, factor)

    def forward(
        self,
        h: torch.Tensor,
        context: torch.Tensor,
        skip_terms: tuple[torch.Tensor, ...],
        sketch: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Equal to convolving the concatenated [x, skip] at every stage (see `skip_terms`); `sketch`
        (N, 3, S/2, S/2): this frame's arm (required with `arm_sketch`)."""
        terms = list(skip_terms)
        for i, conv in enumerate(self.sketch_convs):
            terms[i] = terms[i] + _conv(conv, self._at(sketch, terms[i].shape[-1]), 0)
        x = self.inp(h).view(h.shape[0], -1, self.side, self.side)
        for (conv, norm, act), term in zip(self.stages, terms[:-1], strict=True):  # the last: head's
            x = act(norm(_conv_transpose(conv, x, 0) + term))
        out = _conv_transpose(self.head, x, 0) + terms[-1]
        # context + mask * (generated - context), in one pass
        return torch.lerp(context, torch.sigmoid(out[:, :3]), torch.sigmoid(out[:, 3:]))


def _conv_transpose(
    conv: nn.ConvTranspose2d, x: torch.Tensor, first: int, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """`conv` applied to x as its input channels first..first + C (the others read as zeros)."""
    weight = conv.weight[first : first + x.shape[1]]
    return nn.functional.conv_transpose2d(x, weight, bias, conv.stride, conv.padding)


def _conv(conv: nn.Conv2d, x: torch.Tensor, first: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`conv` applied to x as its input channels first..first + C (the others read as zeros)."""
    weight = conv.weight[:, first : first + x.shape[1]]
    return nn.functional.conv2d(x, weight, bias, conv.stride, conv.padding)


def _mlp(d_in: int, d_out: int, width: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, width), nn.SiLU(), nn.Linear(width, d_out))


class CoachWorld(nn.Module):
    """The world model; `forward(batch)` is the training loss, `observe`/`imagine` the inference API."""

    def __init__(self, config: WorldConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or WorldConfig()
        self.kinematics = AgnosticKinematics()
        self.sketch = (
            ArmSketch(self.kinematics, c.sketch_link_width, c.sketch_hand_width) if c.arm_sketch else None
        )
        self.robot = nn.Embedding(len(ROBOTS), c.robot_dim)
        self.encoder = Encoder(c)
        self.obs_proprio = _mlp(REPR_DIM + ACTION_DIM, c.embed_dim, c.embed_dim)
        self.history = nn.GRU(c.embed_dim, c.hidden_dim, batch_first=True)
        self.init_h = nn.Linear(c.hidden_dim + c.robot_dim, c.hidden_dim)
        self.action = _mlp(REPR_DIM + c.robot_dim, c.embed_dim, c.embed_dim)
        self.prior = _mlp(c.hidden_dim + c.embed_dim, 2 * c.latent_dim, c.hidden_dim)
        self.posterior = _mlp(c.hidden_dim + 2 * c.embed_dim, 2 * c.latent_dim, c.hidden_dim)
        self.cell = nn.GRUCell(c.latent_dim + c.embed_dim, c.hidden_dim)
        self.decoder = Decoder(c)
        self.proprio_delta = _mlp(c.hidden_dim + c.robot_dim, ACTION_DIM, c.hidden_dim)
        # (logit of the blocked mode, its reading before a sigmoid)
        self.grasp = _mlp(c.hidden_dim + c.robot_dim, 2, c.hidden_dim) if c.gripper_modes else None
        masks = torch.stack([torch.from_numpy(channel_mask(r)) for r in ROBOTS]).float()
        self.register_buffer("channel_masks", masks, persistent=False)  # (n_robots, ACTION_DIM)

    @property
    def device(self) -> torch.device:
        return self.robot.weight.device

    # ------------------------------------------------------------------ pieces
    def _embed(self, images: torch.Tensor, proprio: torch.Tensor, robot_ids: torch.Tensor):
        """(B, T, S, S, 3) float [0, 1], (B, T, 8) -> embeddings (B, T, E), skips of the last frame."""
        b, t = images.shape[:2]
        flat = images.reshape(b * t, *images.shape[2:]).permute(0, 3, 1, 2)  # (B*T, 3, S, S)
        emb, feats = self.encoder(flat)
        ids = robot_ids[:, None].expand(b, t)
        prop = torch.cat([self.kinematics.encode(proprio, ids), proprio], dim=-1)  # (B, T, 10 + 8)
        emb = emb.view(b, t, -1) + self.obs_proprio(prop)
        last = tuple(f.view(b, t, *f.shape[1:])[:, -1] for f in feats)
        return emb, last

    def _start(self, images, proprio, robot_ids, context: torch.Tensor | None = None) -> WorldState:
        """State from a history (B, Th, S, S, 3) in [0, 1]; `context` (B, S, S, 3): composite over it
        instead of the last history frame (training: the clean frame when the history is noised)."""
        emb, skips = self._embed(images, proprio, robot_ids)
        _, last = self.history(emb)  # (1, B, H)
        h = torch.tanh(self.init_h(torch.cat([last[0], self.robot(robot_ids)], dim=-1)))
        context = images[:, -1] if context is None else context
        context_sketch = self._sketch(proprio[:, -1:], robot_ids)
        terms = self.decoder.skip_terms(skips, None if context_sketch is None else context_sketch[:, 0])
        return WorldState(h, context.permute(0, 3, 1, 2), terms, robot_ids)

    def _sketch(self, proprio: torch.Tensor, robot_ids: torch.Tensor) -> torch.Tensor | None:
        """(B, K, 8) proprio -> (B, K, 3, S/2, S/2) arm sketches (`arm_sketch`), None without them."""
        if self.sketch is None:
            return None
        b, k = proprio.shape[:2]
        ids = robot_ids[:, None].expand(b, k).reshape(-1)
        maps = self.sketch(proprio.detach().reshape(b * k, -1).float(), ids, self.decoder.sketch_size)
        return maps.view(b, k, *maps.shape[1:])

    def _actions(self, actions: torch.Tensor, robot_ids: torch.Tensor) -> torch.Tensor:
        """(B, K, 8) padded joint targets -> (B, K, E) agnostic action features."""
        rep = self.kinematics.encode(actions, robot_ids)
        arm = self.robot(robot_ids)[:, None].expand(-1, actions.shape[1], -1)
        return self.action(torch.cat([rep, arm], dim=-1))

    def _gaussian(self, net: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw = net(x).chunk(2, dim=-1)
        return mean, nn.functional.softplus(raw) + self.config.min_std

    def _decode(
        self,
        hs: torch.Tensor,
        state: WorldState,
        actions: torch.Tensor,
        frame_dtype: torch.dtype | None = None,
    ):
        """hs (B, K, H) -> frames (B, K, 3, S, S) in [0, 1], proprio (B, K, 8) (residual on the targets),
        and with `gripper_modes` the gripper's `GripperModes`, else None.

        The gripper channel is the mode `state.grasp_draw` picks, or (no draw: training) the mixture's
        mean. frame_dtype (e.g. bfloat16) runs the frame decoder under autocast: it is most of an
        imagined step, and frames end as 8-bit pixels anyway. Proprio and the latent path stay float32.
        """
        k = hs.shape[1]
        arm = self.robot(state.robot_ids)[:, None].expand(-1, k, -1)
        mask = self.channel_masks[state.robot_ids][:, None]  # (B, 1, 8)
        features = torch.cat([hs, arm], dim=-1)
        proprio = (actions + self.proprio_delta(features)) * mask
        modes = None
        if self.grasp is not None:
            logit, raw = self.grasp(features).unbind(-1)
            modes = GripperModes(torch.sigmoid(logit), torch.sigmoid(raw), proprio[..., -1])
            proprio = torch.cat([proprio[..., :-1], modes.reading(state.grasp_draw)[..., None]], dim=-1)
        sketches = self._sketch(proprio, state.robot_ids)  # where the predicted arm is, frame by frame
        sketch_at = [None if sketches is None else sketches[:, j] for j in range(k)]
        # Step by step: the skip terms are shared, and copying them K times costs more than the convolutions.
        with torch.autocast(hs.device.type, dtype=frame_dtype, enabled=frame_dtype is not None):
            frames = torch.stack(
                [self.decoder(hs[:, j], state.context, state.skip_terms, sketch_at[j]) for j in range(k)],
                dim=1,
            ).float()
        return frames, proprio, modes

    # ------------------------------------------------------------------ inference API
    @torch.no_grad()
    def observe(self, images: torch.Tensor, proprio: torch.Tensor, robot_ids: torch.Tensor) -> WorldState:
        """State after a real history: images (B, Th, S, S, 3) uint8, proprio (B, Th, 8) padded, ids (B,)."""
        _check_inputs(images, proprio, robot_ids, self.config.image_size)
        dev = self.device
        return self._start(images.to(dev).float() / 255.0, proprio.to(dev).float(), robot_ids.to(dev))

    @torch.no_grad()
    def imagine(
        self,
        state: WorldState,
        actions: torch.Tensor,
        robot_ids: torch.Tensor,
        generator: torch.Generator | None = None,
        frame_dtype: torch.dtype | None = None,
    ) -> tuple[WorldState, torch.Tensor, torch.Tensor]:
        """Roll K >= 1 actions forward from `state`.

        actions: (B, K, 8) float, padded joint targets + gripper command of each row's arm (converted
        to the agnostic representation here). Returns the new state, frames (B, K, S, S, 3) uint8 and
        proprio (B, K, 8) float (zeros on unused channels); frame k follows action k. The noise is
        drawn from `generator` (on any device; None: torch's global RNG). frame_dtype: decode the
        frames in that precision (`device.fast_dtype`); None: float32.
        """
        if actions.dim() != 3 or actions.shape[0] != state.h.shape[0] or actions.shape[-1] != ACTION_DIM:
            raise ValueError(
                f"actions must be (B={state.h.shape[0]}, K, {ACTION_DIM}), got {tuple(actions.shape)}"
            )
        if actions.shape[1] < 1:
            raise ValueError("imagine needs at least one action (K >= 1)")
        robot_ids = robot_ids.to(self.device)
        if not torch.equal(robot_ids, state.robot_ids):
            raise ValueError(
                f"robot_ids {robot_ids.tolist()} differ from the state's {state.robot_ids.tolist()}"
            )
        actions = actions.to(self.device).float()
        feats = self._actions(actions, robot_ids)
        h, hs = state.h, []
        noise_device = generator.device if generator else h.device
        draw = state.grasp_draw
        if self.grasp is not None and draw is None:  # once per rollout: its grasps' outcome
            draw = torch.rand(h.shape[0], generator=generator, device=noise_device).to(h.device)
        shape = (h.shape[0], self.config.latent_dim)
        for k in range(actions.shape[1]):
            mean, std = self._gaussian(self.prior, torch.cat([h, feats[:, k]], dim=-1))
            noise = torch.randn(shape, generator=generator, device=noise_device)
            h = self.cell(torch.cat([mean + std * noise.to(h.device), feats[:, k]], dim=-1), h)
            hs.append(h)
        state = WorldState(h, state.context, state.skip_terms, robot_ids, draw)
        frames, proprio, _ = self._decode(torch.stack(hs, dim=1), state, actions, frame_dtype)
        return state, to_uint8(frames.permute(0, 1, 3, 4, 2)), proprio

    # ------------------------------------------------------------------ training
    def forward(
        self, batch: dict[str, torch.Tensor], loss: LossConfig
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Training loss of a batch of windows (keys: `data.WINDOW_KEYS`) -> (loss, scalar parts)."""
        robot_ids = batch["robot_id"]
        th = batch["history_images"].shape[1]
        if loss.vary_history:  # observe() gets 1..Th real frames (the imagination loop starts from one)
            th = int(torch.randint(1, th + 1, ()).item())
        clean = batch["history_images"][:, -th:].float() / 255.0  # (B, th, S, S, 3)
        history = clean
        if loss.history_noise > 0:  # imperfect (e.g. imagined) history must not derail the encoder
            sigma = loss.history_noise * torch.rand(clean.shape[0], 1, 1, 1, 1, device=clean.device)
            history = (clean + sigma * torch.randn_like(clean)).clamp(0, 1)
        state = self._start(history, batch["history_proprio"][:, -th:], robot_ids, context=clean[:, -1])
        actions = batch["actions"]  # (B, K, 8)
        target = batch["future_images"].float() / 255.0  # (B, K, S, S, 3)
        valid = batch["valid"].float()  # (B, K)
        b, k = valid.shape
        feats = self._actions(actions, robot_ids)
        future_emb, _ = self._embed(target, batch["future_proprio"], robot_ids)  # (B, K, E)
        free_running = (torch.rand(b, 1, device=valid.device) < loss.prior_fraction).float()
        h, hs, kls = state.h, [], []
        for step in range(k):
            pm, ps = self._gaussian(self.prior, torch.cat([h, feats[:, step]], dim=-1))
            qm, qs = self._gaussian(
                self.posterior, torch.cat([h, feats[:, step], future_emb[:, step]], dim=-1)
            )
            z_post, z_prior = qm + qs * torch.randn_like(qs), pm + ps * torch.randn_like(ps)
            z = free_running * z_prior + (1 - free_running) * z_post
            kls.append(_kl(qm, qs, pm, ps))
            h = self.cell(torch.cat([z, feats[:, step]], dim=-1), h)
            if loss.latent_noise > 0:
                h = h + loss.latent_noise * torch.randn_like(h)
            hs.append(h)
        frames, proprio, modes = self._decode(torch.stack(hs, dim=1), state, actions)
        weight = valid / valid.sum().clamp(min=1)
        image_mse = motion_weighted_mse(frames.permute(0, 1, 3, 4, 2), target, clean[:, -1], loss)  # (B, K)
        joints = self.channel_masks[robot_ids][:, None].clone()
        joints[..., -1] = False  # the gripper is weighed on its own
        error = proprio - batch["future_proprio"]
        joint_mse = ((error * joints) ** 2).sum(-1) / joints.sum(-1)  # (B, K)
        kl = torch.stack(kls, dim=1)  # (B, K) nats per step
        image_term, joint_term = (image_mse * weight).sum(), (joint_mse * weight).sum()
        gripper_term = (gripper_error(proprio, modes, batch["future_proprio"], loss) * weight).sum()
        kl_term = (kl * weight).sum()
        total = (
            image_term
            + loss.proprio_weight * joint_term
            + loss.gripper_weight * gripper_term
            + loss.kl_weight * kl_term.clamp(min=loss.free_nats)
        )
        parts = {
            "loss": total.item(),
            "image_mse": image_term.item(),
            "joint_mse": joint_term.item(),
            "gripper_mse": gripper_term.item(),
            "kl": kl_term.item(),
        }
        return total, parts


def motion_weighted_mse(
    frames: torch.Tensor, target: torch.Tensor, last: torch.Tensor, loss: LossConfig
) -> torch.Tensor:
    """Per-frame MSE (B, K) of frames vs target (B, K, S, S, 3) in [0, 1], a weighted mean over pixels.

    Pixels where the target differs from `last` (B, S, S, 3), the last real frame, by more than
    `loss.motion_threshold` weigh 1 + `loss.motion_weight`, the others 1.

    >>> target = torch.zeros(1, 1, 1, 2, 3); target[..., 1, :] = 1.0      # pixel 1 moved
    >>> frames = torch.zeros(1, 1, 1, 2, 3)                                 # copy of the last frame
    >>> motion_weighted_mse(frames, target, torch.zeros(1, 1, 2, 3), LossConfig(motion_weight=0.0))
    tensor([[0.5000]])
    >>> motion_weighted_mse(frames, target, torch.zeros(1, 1, 2, 3), LossConfig(motion_weight=3.0))
    tensor([[0.8000]])
    """
    error = ((frames - target) ** 2).mean(-1)  # (B, K, S, S)
    if loss.motion_weight == 0:  # the default: plain MSE, no motion mask to build
        return error.mean((2, 3))
    moved = (target - last[:, None]).abs().amax(-1) > loss.motion_threshold
    weight = 1 + loss.motion_weight * moved.float()
    return (error * weight).sum((2, 3)) / weight.sum((2, 3))


def _kl(qm: torch.Tensor, qs: torch.Tensor, pm: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    """KL(N(qm, qs) || N(pm, ps)) summed over the last axis."""
    return (torch.log(ps / qs) + (qs**2 + (qm - pm) ** 2) / (2 * ps**2) - 0.5).sum(-1)


def to_uint8(frames: torch.Tensor) -> torch.Tensor:
    """Float frames in [0, 1] -> uint8 [0, 255] (rounded)."""
    return (frames.clamp(0, 1) * 255).round().to(torch.uint8)


def gripper_error(
    proprio: torch.Tensor, modes: GripperModes | None, target: torch.Tensor, loss: LossConfig
) -> torch.Tensor:
    """(B, K) error of the predicted gripper reading: squared, or with the two modes 2 std^2 x the
    mixture's negative log-likelihood (without its constant), which a sure, right mode makes squared."""
    reading = target[..., -1]
    if modes is None:
        return (proprio[..., -1] - reading) ** 2
    var2 = 2 * loss.gripper_std**2
    p = modes.p_blocked.clamp(1e-6, 1 - 1e-6)
    free = torch.log1p(-p) - (reading - modes.free) ** 2 / var2
    blocked = torch.log(p) - (reading - modes.blocked) ** 2 / var2
    log_modes = torch.stack([free, blocked], dim=-1)
    return -var2 * torch.logsumexp(log_modes, dim=-1)


def _check_inputs(images: torch.Tensor, proprio: torch.Tensor, robot_ids: torch.Tensor, size: int) -> None:
    if images.dtype != torch.uint8 or images.dim() != 5 or tuple(images.shape[2:]) != (size, size, 3):
        raise ValueError(
            f"images must be (B, Th, {size}, {size}, 3) uint8, got {tuple(images.shape)} {images.dtype}"
        )
    b, th = images.shape[:2]
    if th < 1 or tuple(proprio.shape) != (b, th, ACTION_DIM):
        raise ValueError(f"proprio must be (B={b}, Th={th}, {ACTION_DIM}), got {tuple(proprio.shape)}")
    if tuple(robot_ids.shape) != (b,):
        raise ValueError(f"robot_ids must be (B={b},), got {tuple(robot_ids.shape)}")
