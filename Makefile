# The two commands README.md starts with, and the pieces they are made of.
.PHONY: setup demo test lint clean

setup:            ## create .venv, install pinned requirements, colcon-build ros2_ws (idempotent)
	bash scripts/setup.sh

demo: setup       ## the main job on the embedded default (MuJoCo scene)
	bin/robocoach demo $(ARGS)

test: setup       ## the whole test suite
	bash scripts/run_tests.sh $(ARGS)

lint: setup
	bash -c '. env.sh && ruff check .'

clean:            ## remove build outputs (keeps .venv)
	rm -rf ros2_ws/build ros2_ws/install ros2_ws/log
