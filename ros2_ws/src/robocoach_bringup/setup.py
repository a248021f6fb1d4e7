from glob import glob

from setuptools import find_packages, setup

package_name = "robocoach_bringup"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/config", glob("config/*")),
        ("share/" + package_name + "/launch", glob("launch/*.py")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="RoboCoach maintainers",
    maintainer_email="maintainers@robocoach.dev",
    description="Launch files, parameters, rviz config, the node graph and the robocoach CLI.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "robocoach = robocoach_bringup.cli:main",
            "interface_echo = robocoach_bringup.interface_echo:main",
        ],
    },
)
