"""ROS 2 nodes of robocoach_world: thin adapters over the rclpy-free learning code."""
