"""ROS 2 nodes of the robot side: thin adapters over the rclpy-free library code."""
