from setuptools import find_packages, setup

package_name = "robocoach_world"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="RoboCoach maintainers",
    maintainer_email="maintainers@robocoach.dev",
    description="Offboard side of RoboCoach: CoachWorld, progress judge, RIDI coach, training, nodes.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "progress_judge = robocoach_world.nodes.progress_judge:main",
            "world_model = robocoach_world.nodes.world_model:main",
            "coach = robocoach_world.nodes.coach:main",
        ],
    },
)
