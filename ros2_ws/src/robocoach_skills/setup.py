from setuptools import find_packages, setup

package_name = "robocoach_skills"

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
    description="Robot side of RoboCoach: MuJoCo robot, skills, tasks, experts, router, backends, nodes.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "sim_robot = robocoach_skills.nodes.sim_robot:main",
            "skill_executor = robocoach_skills.nodes.skill_executor:main",
            "demo_recorder = robocoach_skills.nodes.demo_recorder:main",
            "task_markers = robocoach_skills.nodes.task_markers:main",
            "scripted_operator = robocoach_skills.nodes.scripted_operator:main",
            "robot_driver = robocoach_skills.nodes.robot_driver:main",
        ],
    },
)
